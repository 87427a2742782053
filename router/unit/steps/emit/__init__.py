"""The emit step (pure): a decided batch -> the records of its transaction (`emitter`), with
what it produces (`records`) and its helpers: multicast copies (`fanout`), expired messages
(`letters`) and the send side's control markers (`markers`)."""
