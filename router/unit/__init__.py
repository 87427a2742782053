"""A transfer unit: the run loop (`loop.TransferUnit`), its source consumer (`source`,
`bandsource`), the raw relay (`relay`) and its metrics endpoint (`exporting`).

`commit/` is the transaction around a batch and what must hold before it commits;
`steps/` are the batch's steps (classify -> route -> emit, the drain), pure where they can
be."""
