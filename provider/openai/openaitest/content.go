package openaitest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
)

// The checks the real APIs make on the parts of a user message's content:
// the part types they know, and images and files as data URLs with
// base64 that decodes (or a file id).

// validDataURL reports whether u is a base64 data URL of a media type.
func validDataURL(u string) bool {
	meta, data, ok := strings.Cut(strings.TrimPrefix(u, "data:"), ",")
	if !strings.HasPrefix(u, "data:") || !ok || !strings.HasSuffix(meta, ";base64") || !strings.Contains(meta, "/") {
		return false
	}
	_, err := base64.StdEncoding.DecodeString(data)
	return err == nil
}

// chatContentProblem checks a Chat Completions user message's array
// content; "" when it is what the API takes.
func chatContentProblem(p string, raw json.RawMessage) (param, msg string) {
	c := strings.TrimSpace(string(raw))
	if c == "" || c[0] != '[' {
		return "", ""
	}
	var parts []struct {
		Type     string `json:"type"`
		ImageURL *struct {
			URL string `json:"url"`
		} `json:"image_url"`
		File *struct {
			Filename string `json:"filename"`
			FileData string `json:"file_data"`
			FileID   string `json:"file_id"`
		} `json:"file"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return p, err.Error()
	}
	for j, part := range parts {
		at := fmt.Sprintf("%s.content[%d]", p, j)
		switch part.Type {
		case "text":
		case "image_url":
			if part.ImageURL == nil || !(validDataURL(part.ImageURL.URL) || strings.HasPrefix(part.ImageURL.URL, "https://")) {
				return at + ".image_url.url", "Invalid image URL: expected a base64-encoded data URL or an https URL."
			}
		case "file":
			if part.File == nil || (part.File.FileID == "" && (!validDataURL(part.File.FileData) || part.File.Filename == "")) {
				return at + ".file", "A file part needs file_id, or file_data (a base64 data URL) and filename."
			}
		default:
			return at + ".type", fmt.Sprintf("Invalid value: '%s'. Supported values are: 'text', 'image_url', 'input_audio', 'refusal', 'audio', and 'file'.", part.Type)
		}
	}
	return "", ""
}

// responsesContentProblem checks a Responses API input message's array
// content.
func responsesContentProblem(p string, raw json.RawMessage) (param, msg string) {
	c := strings.TrimSpace(string(raw))
	if c == "" || c[0] != '[' {
		return "", ""
	}
	var parts []struct {
		Type     string `json:"type"`
		ImageURL string `json:"image_url"`
		FileID   string `json:"file_id"`
		FileData string `json:"file_data"`
		Filename string `json:"filename"`
		Detail   string `json:"detail"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return p, err.Error()
	}
	for j, part := range parts {
		at := fmt.Sprintf("%s.content[%d]", p, j)
		switch part.Type {
		case "input_text", "output_text":
		case "input_image":
			if part.Detail == "" {
				return at + ".detail", "Missing required parameter: 'detail'."
			}
			if part.FileID == "" && !validDataURL(part.ImageURL) && !strings.HasPrefix(part.ImageURL, "https://") {
				return at + ".image_url", "Invalid image URL: expected a base64-encoded data URL or an https URL."
			}
		case "input_file":
			if part.FileID == "" && (!validDataURL(part.FileData) || part.Filename == "") {
				return at + ".file_data", "An input_file needs file_id, or file_data (a base64 data URL) and filename."
			}
		default:
			return at + ".type", fmt.Sprintf("Invalid value: '%s'. Supported values are: 'input_text', 'input_image' and 'input_file'.", part.Type)
		}
	}
	return "", ""
}
