"""A topology's two sides, sources and destinations (`side`), and the topics it needs
(`topics`)."""
