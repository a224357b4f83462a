"""Runnable example apps; ``python -m examples NAME`` runs one offline (see offline.py)."""
