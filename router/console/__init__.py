"""`router console`: the live status page, served over HTTP (`server`) from what pure
functions build (`view`); the page itself is `console.html`."""
