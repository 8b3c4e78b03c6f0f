// Package images builds, lists, saves and loads every image the project
// needs — the sandbox image, a tiny busybox test image, the llama-server
// image — without any registry: root filesystems come from Debian packages
// (debootstrap) or from tar streams written here, and are imported into the
// engine. Bundles (a manifest plus the engine's save stream) carry images to
// air-gapped machines; plain `docker save` archives load too.
//
// It owns: the fixed image tags and label keys (Sandbox, Busybox,
// LlamaServer, LabelImage...), the build recipes (one file per kind of
// root filesystem: busybox.go, debian.go), List, Save and Load.
//
// It must never: pull from a registry (the Engine seam has no pull call),
// import other packages of this project, write to the terminal (progress
// goes to a ProgressFunc), replace a working image with an unverified one
// (builds land on a temporary tag and are retagged only after a command
// ran in them), or delete a build directory that still has something
// mounted under it.
//
// The recipes stay in this one package rather than images/<name>/: they
// share the debootstrap, trim, tar and import steps and differ only in a
// few lines of data.
package images
