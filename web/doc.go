// Package web is ratelimitd's browser console over admin.Local: pages
// without JavaScript, HttpOnly SameSite=Strict session cookies,
// CSRF-checked POSTs, argon2id (RFC 9106) passwords. See docs/console.md.
package web
