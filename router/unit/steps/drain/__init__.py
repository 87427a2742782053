"""The drain step: forward admitted groups' parked records out of the waiting room (`step`),
with its index of room partitions (`index`, pure), the records it writes (`writes`), logical
order (`sequence` pure, `logical` the I/O) and what its helpers read of it (`context`)."""
