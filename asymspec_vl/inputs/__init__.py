"""A request's inputs: the three views, images, user text, the pair's shared vocabulary, the token budget."""
