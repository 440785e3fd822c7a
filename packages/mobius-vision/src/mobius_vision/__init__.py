__version__ = "0.1.0"


def register(registry):
    pass
