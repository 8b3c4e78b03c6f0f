// Package images builds, lists, saves and loads every image the project
// needs — the sandbox image, a tiny busybox test image, the llama-server
// image — without any registry: root filesystems come from Debian packages
// (debootstrap) or from tar streams written here, and are imported into the
// engine. It never pulls.
package images
