"""A CPU emulator for cake's rendered CUDA programs (README.md in this folder)."""

from .loader import EmuError, EmuLoader, Options, emulate

__all__ = ["EmuError", "EmuLoader", "Options", "emulate"]
