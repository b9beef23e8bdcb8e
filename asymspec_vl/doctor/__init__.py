"""`asymspec-vl doctor`: is the vLLM path right on this machine (cli.py), and its checks."""
