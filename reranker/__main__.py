"""``python -m reranker`` runs the command line."""

from .cli import main

main()
