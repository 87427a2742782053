"""The receiver library against the real broker and Redis: band restore, expiry at the
receiver, redelivery."""
