"""``reranker learners``: the registered learners and their parameters."""

from __future__ import annotations

import click


@click.command()
def learners() -> None:
    """List the registered learners with their parameters."""
    from reranker.core.plugins import get_plugin_manager, learner_classes

    for name, cls in learner_classes(get_plugin_manager()).items():
        try:
            stochastic = cls().capabilities.stochastic  # with the default parameters
        except (TypeError, ValueError):  # a plugin that cannot be built without arguments
            stochastic = cls.capabilities.stochastic
        click.echo(f"{name}  {'(stochastic) ' if stochastic else ''}{cls.description}")
        click.echo(f"    experiments: {_experiment_modes(cls)}")
        for param in cls.params:
            click.echo(f"    {param.describe()}")


def _experiment_modes(cls) -> str:
    """What a learner learns from as an experiment's arm, in words."""
    if cls.capabilities.floor:
        return "a floor: it never learns; any mode"
    if cls.capabilities.learns_from_mixed_lists:
        return "learns from its own pages and the mixed pages it takes part in; any mode"
    return ("learns only from pages it ranks itself: experiment.mode split (interleave and "
            "multileave are refused)")
