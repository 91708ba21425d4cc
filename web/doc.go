// Package web is ratelimitd's browser console over the admin socket's
// services (admin.Rates, admin.Quarantine, admin.Events, admin.Status):
// server-rendered pages without JavaScript, sessions in HttpOnly
// SameSite=Strict cookies, CSRF-checked POSTs, argon2id (RFC 9106)
// passwords. See docs/console.md.
package web
