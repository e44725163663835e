"""The ``reranker`` command line (:mod:`.main`), one module per command group, with their
console output. Each command imports what it runs inside its function, so that ``reranker
--help`` answers in about half a second, where importing the service alone takes about 2 s. Imports
everything below."""
