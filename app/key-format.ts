/**
 * What an account API key looks like: `sbk_` + 43 base64url characters (32 random bytes). The
 * prefix makes a leaked key recognisable in a log or to a secret scanner, and tells it apart
 * from the admin key, which may not start with it (app/admin-key.ts).
 */
export const KEY_PREFIX = 'sbk_';
export const KEY_PATTERN = /^sbk_[A-Za-z0-9_-]{43}$/;
/** Characters of a key kept in clear in listings: the prefix and 8 more. */
export const SHOWN_CHARS = KEY_PREFIX.length + 8;
