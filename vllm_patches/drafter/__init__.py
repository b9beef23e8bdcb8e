"""The drafter of method asymspec: the proposer, its x_full and x_comp views, its passes, attention metadata, logits
a, the image cache."""
