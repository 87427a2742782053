"""Pure tests of router.unit.loop.steps: the batch's steps, and behaviour suites on pure harnesses
(tables as the model, fake logs; no Kafka, no Redis)."""
