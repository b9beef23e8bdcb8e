"""The Gradio demo (`asymspec-vl demo`): the page in page.py, its events in handlers.py, what they do in service.py."""
