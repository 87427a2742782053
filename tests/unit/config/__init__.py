"""Pure tests of router.config: settings, and the clients' librdkafka configuration."""
