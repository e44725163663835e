"""What was learned and who learns it: a ranking model (learner, feature spec, version),
the folder of its saved versions, the arms that serve one model each, the per-client training
budget and the trainer that applies the logged clicks. Imports stores, learners and below."""
