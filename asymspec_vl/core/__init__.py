"""The core: the paper's math (Eq. 1-4), the methods, the decoding loop (Algorithm 1), its trace; no models, no
inputs."""
