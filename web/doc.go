// Package web is ratelimitd's browser console over the admin API's
// services (admin.Local): server-rendered pages without JavaScript, sessions in HttpOnly
// SameSite=Strict cookies, CSRF-checked POSTs, argon2id (RFC 9106)
// passwords. See docs/console.md.
package web
