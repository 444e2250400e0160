// Package ui is the daemon's status page: a single HTML page with its
// stylesheet and plain JavaScript modules, all embedded in the binary (no
// build step, nothing fetched from elsewhere). The page reads the daemon's
// JSON API and its event stream with same-origin relative URLs; see
// docs/ui.md.
package ui

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed static
var static embed.FS

// htmlType is the content type of the page itself.
const htmlType = "text/html; charset=utf-8"

// contentType is the type of a file the page is made of, by its extension;
// "" for another extension (such a file is not served).
func contentType(ext string) string {
	switch ext {
	case ".html":
		return htmlType
	case ".css":
		return "text/css; charset=utf-8"
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	}
	return ""
}

// asset is one embedded file, ready to serve.
type asset struct {
	body        []byte
	contentType string
	etag        string
}

// Handler returns the handler of the status page's files, served from its
// root: "/" is index.html and "/app.js" the file app.js; mount it under a
// prefix with http.StripPrefix (the daemon serves it at /ui/). Each file
// has its content type, an ETag of its content and "Cache-Control:
// no-cache" (a browser revalidates, and a 304 answers when nothing
// changed, so a new binary's page is never served stale); only GET and
// HEAD are answered, anything not embedded is 404.
func Handler() http.Handler {
	root, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embed directive guarantees the directory
	}
	assets := map[string]asset{}
	err = fs.WalkDir(root, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		ct := contentType(path.Ext(p))
		if ct == "" {
			return nil
		}
		b, err := fs.ReadFile(root, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		assets["/"+p] = asset{body: b, contentType: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		panic(err) // reading an embed.FS does not fail
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		p := r.URL.Path
		if p == "" || p == "/" {
			p = "/index.html"
		}
		a, ok := assets[p]
		if !ok || strings.Contains(p, "..") {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", a.contentType)
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", a.etag)
		h.Set("X-Content-Type-Options", "nosniff")
		if a.contentType == htmlType {
			h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
			h.Set("Referrer-Policy", "no-referrer")
		}
		http.ServeContent(w, r, p, time.Time{}, bytes.NewReader(a.body))
	})
}
