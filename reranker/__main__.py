"""``python -m reranker`` runs the command line."""

from reranker.commands.main import main

main()
