"""The emulated IBM Spyre device: a PyTorch PrivateUse1 backend named `spyre`."""


def _autoload() -> None:
    """Entry point of the `torch.backends` group, called by a plain `import torch`."""
