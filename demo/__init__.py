"""The Gradio demo (`asymspec-vl demo`): build_demo(DemoService(vl)) in app.py, the handlers in service.py."""
