"""The decoding methods' names, without torch: the command line lists them in its help (methods.py checks that
its METHODS are these, in this order)."""

NAMES = ("asymspec", "sd", "scd", "floor", "drafter")
IMAGE_METHODS = (
    "asymspec",
    "drafter",
)  # the methods whose drafter reads the image (x_full, x_question)
