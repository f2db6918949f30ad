//! Embeds the built web client (`web/dist`, made by `scripts/build-web`) into `moord`: writes
//! `$OUT_DIR/web_assets.rs`, a table of every file under `web/dist` with its content type, read
//! with `include_bytes!`. Runs no Node tooling itself. Without `web/dist` the table is empty and
//! `moord` serves a page saying how to build the client.

use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=../migrations");
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let dist = manifest.join("../web/dist");
    let out =
        PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo")).join("web_assets.rs");
    let mut files = Vec::new();
    if dist.join("index.html").is_file() {
        // Any change in the built client rebuilds the server.
        println!("cargo:rerun-if-changed=../web/dist");
        collect(&dist, &dist, &mut files);
        files.sort();
    } else {
        // Watch for the client being built: web/dist appearing changes what is under web/. (A
        // path that does not exist would make cargo rerun this script, and so rebuild moord, on
        // every build.)
        println!("cargo:rerun-if-changed=../web");
    }
    let mut src = String::from(
        "/// Every file of the built web client: (URL path, content type, bytes).\npub(crate) static ASSETS: &[(&str, &str, &[u8])] = &[\n",
    );
    for (url, path) in &files {
        src.push_str(&format!(
            "    ({url:?}, {:?}, include_bytes!({:?})),\n",
            content_type(url),
            path.display().to_string()
        ));
    }
    src.push_str("];\n");
    std::fs::write(&out, src).expect("write web_assets.rs");
}

fn collect(root: &Path, dir: &Path, files: &mut Vec<(String, PathBuf)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(root, &path, files);
        } else if let Ok(rel) = path.strip_prefix(root) {
            let url = format!("/{}", rel.to_string_lossy().replace('\\', "/"));
            let abs = path.canonicalize().unwrap_or(path);
            files.push((url, abs));
        }
    }
}

fn content_type(path: &str) -> &'static str {
    match path.rsplit('.').next().unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" | "map" => "application/json",
        "webmanifest" => "application/manifest+json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "woff2" => "font/woff2",
        "txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}
