"""The package version, in a module of its own so analysis and exporters can read it without the package
root (which holds the IPython extension hooks)."""

__version__ = "0.1.0"
