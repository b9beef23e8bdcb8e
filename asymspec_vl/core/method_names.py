"""The decoding methods' names, in the order the tables show them, without their rules (which import torch): what
the command line's parsing and --help read."""

NAMES = ("asymspec", "sd", "scd", "floor", "drafter")
