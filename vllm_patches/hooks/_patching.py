"""Idempotent attribute patching: each patched function remembers the original it wraps."""

from __future__ import annotations

import functools

_MARK = "__asymspec_original__"
# True on a wrap of an attribute the owner did not hold itself (a base class's)
_INHERITED = "__asymspec_inherited__"


def is_patched(fn) -> bool:
    return hasattr(fn, _MARK)


def wrap(owner, name: str, make):
    """owner.name = make(orig) unless already patched; `make` returns the replacement."""
    current = owner.__dict__.get(name)
    if current is not None and is_patched(current):
        return
    orig = getattr(owner, name)
    new = make(orig)
    functools.update_wrapper(new, orig)
    setattr(new, _MARK, orig)
    setattr(new, _INHERITED, name not in owner.__dict__)
    setattr(owner, name, new)


def install(owner, name: str, hook) -> None:
    """owner.name(self, *args, **kwargs) becomes hook(original, self, *args, **kwargs), once. Hooks are named
    module-level functions that call `original` for every configuration they do not handle."""

    def make(orig):
        def patched(self, *args, **kwargs):
            return hook(orig, self, *args, **kwargs)

        return patched

    wrap(owner, name, make)


def install_function(module, name: str, hook) -> None:
    """module.name(*args, **kwargs) becomes hook(original, *args, **kwargs), once (a module function)."""

    def make(orig):
        def patched(*args, **kwargs):
            return hook(orig, *args, **kwargs)

        return patched

    wrap(module, name, make)


def unwrap(owner, name: str) -> None:
    """owner.name back to what a wrap replaced (nothing when it is not wrapped): the original, or no own
    attribute at all when the wrapped one was inherited."""
    current = owner.__dict__.get(name)
    if current is None or not is_patched(current):
        return
    if getattr(current, _INHERITED, False):
        delattr(owner, name)
    else:
        setattr(owner, name, getattr(current, _MARK))
