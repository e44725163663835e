"""Learning without a live site: the simulator over labelled learning-to-rank data
(LETOR files, simulated users and click models, ranking quality measures and plots), the
semi-bandit protocol and the demo corpus. Imports models, evaluation and below."""
