"""The ``reranker`` command line (:mod:`.main`) and the commands that are more than a call
(:mod:`.demo`, :mod:`.simulate`), with their console output. Imports everything below."""
