"""What was learned and who learns it: a ranking model (learner, feature spec, version),
the folder of its saved versions, the arms that serve one model each (:mod:`.arms`, over its
parts: what an arm is, where its folder starts, which version it serves, the operator's
changes to its versions, what it learns from an impression), the per-client training budget
and the trainer that applies the logged clicks. Imports stores, learners and below."""
