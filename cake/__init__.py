"""cake: an ahead-of-time kernel package manager, and the deterministic KDA kernels it ships."""

__version__ = "0.1.0"
