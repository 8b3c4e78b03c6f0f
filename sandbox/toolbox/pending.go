package toolbox

import (
	"context"
	"encoding/json"
)

func (s *Server) writeFile(context.Context, json.RawMessage) Response {
	return errorf("write_file: not available yet")
}
func (s *Server) editFile(context.Context, json.RawMessage) Response {
	return errorf("edit_file: not available yet")
}
func (s *Server) multiEdit(context.Context, json.RawMessage) Response {
	return errorf("multi_edit: not available yet")
}
func (s *Server) listDir(context.Context, json.RawMessage) Response {
	return errorf("list_dir: not available yet")
}
func (s *Server) glob(context.Context, json.RawMessage) Response {
	return errorf("glob: not available yet")
}
func (s *Server) grep(context.Context, json.RawMessage) Response {
	return errorf("grep: not available yet")
}
