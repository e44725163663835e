"""What every stage shares: errors, the configuration, the plugin hooks and registry, JSON
text helpers and what a forked worker process renews. Imports nothing else of reranker."""
