"""``reranker learners``: the registered learners and their parameters."""

from __future__ import annotations

import click


@click.command()
def learners() -> None:
    """List the registered learners with their parameters."""
    from reranker.core.plugins import get_plugin_manager, learner_classes

    for name, cls in learner_classes(get_plugin_manager()).items():
        try:
            stochastic = bool(cls().stochastic)  # with the default parameters
        except (TypeError, ValueError):  # a plugin that cannot be built without arguments
            stochastic = cls.stochastic if isinstance(cls.stochastic, bool) else False
        click.echo(f"{name}  {'(stochastic) ' if stochastic else ''}{cls.description}")
        click.echo(f"    experiments: {_experiment_modes(cls)}")
        for param in cls.params:
            click.echo(f"    {param.describe()}")


def _experiment_modes(cls) -> str:
    """What a learner learns from as an experiment's arm, in words."""
    if getattr(cls, "floor", False):
        return "a floor: it never learns; any mode"
    if getattr(cls, "learns_from_mixed_lists", False):
        return "learns from its own pages and the mixed pages it takes part in; any mode"
    return ("learns only from pages it ranks itself: experiment.mode split (interleave and "
            "multileave are refused)")
