"""Course naming rules shared by the build, the course model and the cases (no heavy imports)."""

# the seed of the hidden cases unless --seed says otherwise
DEFAULT_SEED = 0


def module_name(notebook: str) -> str:
    """'01_attention' -> 'nb01_attention' (a Python module name cannot start with a digit)."""
    return f"nb{notebook}"
