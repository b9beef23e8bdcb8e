"""The toy world's evaluation (`asymspec-vl eval toy`): the Table-3-style table of the embedded pair."""
