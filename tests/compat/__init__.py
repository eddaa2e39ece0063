"""The PyTorch compatibility suite (see README.md here). A package, so that its test files may share basenames
with those in tests/ (test_data.py, test_optim.py) without clashing."""
