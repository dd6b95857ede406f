package web_test

import (
	"bytes"
	"encoding/base64"
	"image"
	"image/color"
	"image/png"
	"testing"

	"github.com/forge-runtime/forge"
)

// TestAttachmentsAndStructuredOutput: on a server with keys, an image
// attachment shows as a thumbnail (its bytes fetched with the key, shown
// from a blob: URL under the page's CSP), another file as a link, a
// deleted file says so, and a turn's structured output shows as JSON.
func TestAttachmentsAndStructuredOutput(t *testing.T) {
	s := newServer(t, withKeys(map[string]string{"k-files": "acme"}))
	img := image.NewRGBA(image.Rect(0, 0, 6, 4))
	img.Set(1, 1, color.RGBA{R: 200, A: 255})
	var pngBytes bytes.Buffer
	if err := png.Encode(&pngBytes, img); err != nil {
		t.Fatal(err)
	}
	s.createAgent(map[string]any{"name": "a", "model": "scripted/echo"})
	ses := s.createSession("a", "Files")
	var tr forge.Turn
	s.call("POST", "/v1/sessions/"+ses.ID+"/turns", map[string]any{"input": []any{map[string]any{"type": "message",
		"text": "look", "files": []any{
			map[string]any{"data": base64.StdEncoding.EncodeToString(pngBytes.Bytes()), "mime_type": "image/png", "filename": "dot.png"},
			map[string]any{"data": base64.StdEncoding.EncodeToString([]byte("notes\n")), "mime_type": "text/plain", "filename": "notes.txt"},
		}}}}, 200, &tr)
	if tr.Status != forge.TurnDone || len(tr.Input[0].Files) != 2 {
		t.Fatalf("turn %+v", tr)
	}
	notes := tr.Input[0].Files[1].FileID
	s.call("DELETE", "/v1/files/"+notes, nil, 204, nil)
	// A turn with an output schema, answered with JSON by a script.
	s.createAgent(map[string]any{"name": "j", "model": "scripted/json", "model_params": map[string]any{"script": []any{map[string]any{"text": `{"seen": 2}`}}},
		"output_schema": map[string]any{"name": "reply", "schema": map[string]any{"type": "object"}}})
	jses := s.createSession("j", "Structured")
	var st forge.Turn
	s.call("POST", "/v1/sessions/"+jses.ID+"/turns", map[string]any{"input": []any{map[string]any{"type": "message", "text": "count"}}}, 200, &st)
	if st.Status != forge.TurnDone || st.Output == nil || string(st.Output.JSON) == "" {
		t.Fatalf("structured turn %s: error %+v", st.Status, *st.Error)
	}

	b := newBrowser(t)
	b.navigate(s.URL + "/ui/sessions/" + ses.ID)
	b.waitFor(`document.querySelector('#key-form')`)
	b.typeInto("#api-key", "k-files")
	b.click("#key-form button[type=submit]")
	b.waitFor(`document.body.dataset.state === 'live'`)
	b.waitFor(`(() => { const i = document.querySelector('.part-file img.thumb'); return i && i.complete && i.naturalWidth === 6; })()`)
	if got := eval[string](b, `document.querySelector('.part-file img.thumb').src.slice(0, 5)`); got != "blob:" {
		t.Fatalf("the thumbnail's source is %q", got)
	}
	if got := eval[string](b, `document.querySelector('.part-file img.thumb').alt`); got != "dot.png" {
		t.Fatalf("alt %q", got)
	}
	b.checkConsole() // (the deleted file's 404, next, is logged by the browser)
	// The deleted text file: a link, marked once the page tries it.
	eval[bool](b, `([...document.querySelectorAll('.part-file .file-link')].find((a) => a.textContent === 'notes.txt').click(), true)`)
	b.waitFor(`document.querySelector('.part-file.file-gone') !== null && document.querySelector('.part-file.file-gone').textContent.includes('the file was deleted')`)
	b.navigate(s.URL + "/ui/sessions/" + jses.ID)
	b.waitFor(`document.querySelector('.structured-output pre') !== null`)
	if got := eval[string](b, `document.querySelector('.structured-output pre').textContent`); got != "{\n  \"seen\": 2\n}" {
		t.Fatalf("structured output %q", got)
	}
}
