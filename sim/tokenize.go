package sim

import (
	"encoding/json"
	"hash/fnv"
	"io"
	"net/http"
	"strings"
)

// vocabSize is Llama-3's vocabulary size; token ids are drawn from it.
const vocabSize = 128256

type tokenizeRequest struct {
	Model    string        `json:"model"`
	Prompt   *string       `json:"prompt"`
	Messages []chatMessage `json:"messages"`
}

// serveTokenize answers like vLLM's /tokenize: one token per
// whitespace-separated word, with a stable id per word.
func (s *Server) serveTokenize(w http.ResponseWriter, r *http.Request) {
	k := s.Knobs()
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil || len(body) > maxBodyBytes {
		writeError(w, http.StatusBadRequest, "BadRequestError", "request body unreadable or too large")
		return
	}
	var req tokenizeRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", "invalid JSON body: "+err.Error())
		return
	}
	if req.Model != "" && req.Model != k.Model {
		writeError(w, http.StatusNotFound, "NotFoundError", "The model `"+req.Model+"` does not exist.")
		return
	}
	var words []string
	switch {
	case req.Prompt != nil:
		words = strings.Fields(*req.Prompt)
	case req.Messages != nil:
		for i, m := range req.Messages {
			text, err := contentText(m.Content)
			if err != nil {
				writeError(w, http.StatusBadRequest, "BadRequestError", "messages["+itoa(i)+"]: "+err.Error())
				return
			}
			words = append(words, strings.Fields(text)...)
		}
	default:
		writeError(w, http.StatusBadRequest, "BadRequestError", "either prompt or messages is required")
		return
	}
	ids := make([]int, len(words))
	for i, word := range words {
		h := fnv.New32a()
		_, _ = h.Write([]byte(word))
		ids[i] = int(h.Sum32() % vocabSize)
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"count": len(ids), "max_model_len": k.MaxModelLen, "tokens": ids, "token_strs": nil,
	})
}

// contentText joins the text of a chat message content.
func contentText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var str string
	if err := json.Unmarshal(raw, &str); err == nil {
		return str, nil
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errMessageContent
	}
	texts := make([]string, len(parts))
	for i, p := range parts {
		texts[i] = p.Text
	}
	return strings.Join(texts, " "), nil
}
