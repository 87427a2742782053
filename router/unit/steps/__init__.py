"""A unit's batch, step by step: the batch value (`batch`), classify (`classify`), route
(`route`), priority bands (`bands`), held partitions and back-off (`holds`), the emit step
(`emit/`) and the drain of the waiting room (`drain/`), composed by `pipeline`."""
