"""Thin adapters onto vLLM's classes (config, model runner, CPU runner, scheduler, worker RPCs); each calls vLLM's own
method for every method but asymspec."""
