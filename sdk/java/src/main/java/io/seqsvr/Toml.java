package io.seqsvr;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A small TOML reader: enough of TOML 1.0 for the cluster file (tables, arrays of tables,
 * dotted and quoted keys, basic and literal strings, integers, floats, booleans, arrays and
 * inline tables, comments). Multi-line strings and dates are not supported (the cluster file
 * uses neither). Tables are {@code Map<String, Object>} in file order, arrays {@code List},
 * integers {@code Long} (TOML integers are signed 64-bit), floats {@code Double}.
 */
final class Toml {
  private final String src;
  private int pos;
  private int line = 1;

  private Toml(String src) {
    this.src = src;
  }

  /** Parses a whole document; IllegalArgumentException with the line on a syntax error. */
  static Map<String, Object> parse(String text) {
    return new Toml(text).document();
  }

  private IllegalArgumentException error(String what) {
    return new IllegalArgumentException("line " + line + ": " + what);
  }

  private boolean atEnd() {
    return pos >= src.length();
  }

  private char peek() {
    return atEnd() ? '\0' : src.charAt(pos);
  }

  private void skipSpaces() {
    while (!atEnd() && (peek() == ' ' || peek() == '\t')) {
      pos++;
    }
  }

  /** Spaces, newlines and comments (inside arrays). */
  private void skipBlank() {
    while (!atEnd()) {
      char c = peek();
      if (c == ' ' || c == '\t' || c == '\r') {
        pos++;
      } else if (c == '\n') {
        pos++;
        line++;
      } else if (c == '#') {
        skipComment();
      } else {
        return;
      }
    }
  }

  private void skipComment() {
    while (!atEnd() && peek() != '\n') {
      pos++;
    }
  }

  /** The rest of a line after a value or header: spaces, a comment, then a newline or EOF. */
  private void endOfLine() {
    skipSpaces();
    if (peek() == '#') {
      skipComment();
    }
    if (peek() == '\r') {
      pos++;
    }
    if (atEnd()) {
      return;
    }
    if (peek() != '\n') {
      throw error("expected the end of the line, found '" + peek() + "'");
    }
    pos++;
    line++;
  }

  @SuppressWarnings("unchecked")
  private Map<String, Object> document() {
    Map<String, Object> root = new LinkedHashMap<>();
    Map<String, Object> current = root;
    while (true) {
      skipBlank();
      if (atEnd()) {
        return root;
      }
      if (peek() == '[') {
        boolean array = src.startsWith("[[", pos);
        pos += array ? 2 : 1;
        skipSpaces();
        List<String> path = keyPath();
        skipSpaces();
        if (!src.startsWith(array ? "]]" : "]", pos)) {
          throw error("expected '" + (array ? "]]" : "]") + "' after the table name");
        }
        pos += array ? 2 : 1;
        endOfLine();
        Map<String, Object> parent = descend(root, path.subList(0, path.size() - 1));
        String last = path.get(path.size() - 1);
        if (array) {
          Object existing = parent.get(last);
          List<Object> list;
          if (existing == null) {
            list = new ArrayList<>();
            parent.put(last, list);
          } else if (existing instanceof List) {
            list = (List<Object>) existing;
          } else {
            throw error(last + " is not an array of tables");
          }
          current = new LinkedHashMap<>();
          list.add(current);
        } else {
          Object existing = parent.get(last);
          if (existing == null) {
            current = new LinkedHashMap<>();
            parent.put(last, current);
          } else if (existing instanceof Map) {
            current = (Map<String, Object>) existing;
          } else {
            throw error(last + " is not a table");
          }
        }
        continue;
      }
      keyValue(current);
      endOfLine();
    }
  }

  /** The table at path under t, made where missing (the last element of an array of tables). */
  @SuppressWarnings("unchecked")
  private Map<String, Object> descend(Map<String, Object> t, List<String> path) {
    for (String k : path) {
      Object next = t.get(k);
      if (next == null) {
        Map<String, Object> made = new LinkedHashMap<>();
        t.put(k, made);
        t = made;
      } else if (next instanceof Map) {
        t = (Map<String, Object>) next;
      } else if (next instanceof List && !((List<Object>) next).isEmpty()
          && ((List<Object>) next).get(((List<Object>) next).size() - 1) instanceof Map) {
        List<Object> list = (List<Object>) next;
        t = (Map<String, Object>) list.get(list.size() - 1);
      } else {
        throw error(k + " is not a table");
      }
    }
    return t;
  }

  private void keyValue(Map<String, Object> table) {
    List<String> path = keyPath();
    skipSpaces();
    if (peek() != '=') {
      throw error("expected '=' after the key " + String.join(".", path));
    }
    pos++;
    skipSpaces();
    Object value = value();
    Map<String, Object> t = descend(table, path.subList(0, path.size() - 1));
    String last = path.get(path.size() - 1);
    if (t.containsKey(last)) {
      throw error("the key " + String.join(".", path) + " is defined twice");
    }
    t.put(last, value);
  }

  private List<String> keyPath() {
    List<String> path = new ArrayList<>();
    while (true) {
      skipSpaces();
      char c = peek();
      if (c == '"') {
        path.add(basicString());
      } else if (c == '\'') {
        path.add(literalString());
      } else {
        int start = pos;
        while (!atEnd() && (Character.isLetterOrDigit(peek()) || peek() == '_' || peek() == '-')) {
          pos++;
        }
        if (start == pos) {
          throw error("expected a key");
        }
        path.add(src.substring(start, pos));
      }
      skipSpaces();
      if (peek() != '.') {
        return path;
      }
      pos++;
    }
  }

  private Object value() {
    char c = peek();
    switch (c) {
      case '"':
        if (src.startsWith("\"\"\"", pos)) {
          throw error("multi-line strings are not supported");
        }
        return basicString();
      case '\'':
        if (src.startsWith("'''", pos)) {
          throw error("multi-line strings are not supported");
        }
        return literalString();
      case '[':
        return array();
      case '{':
        return inlineTable();
      default:
        break;
    }
    if (src.startsWith("true", pos)) {
      pos += 4;
      return Boolean.TRUE;
    }
    if (src.startsWith("false", pos)) {
      pos += 5;
      return Boolean.FALSE;
    }
    int start = pos;
    while (!atEnd() && "+-_.0123456789abcdefABCDEFxoXOinf".indexOf(peek()) >= 0) {
      pos++;
    }
    String word = src.substring(start, pos).replace("_", "");
    if (word.isEmpty()) {
      throw error("expected a value, found '" + c + "'");
    }
    try {
      if (word.startsWith("0x")) {
        return Long.parseLong(word.substring(2), 16);
      }
      if (word.startsWith("0o")) {
        return Long.parseLong(word.substring(2), 8);
      }
      if (word.startsWith("0b")) {
        return Long.parseLong(word.substring(2), 2);
      }
      if (word.contains(".") || word.contains("e") || word.contains("E") || word.endsWith("inf")
          || word.endsWith("nan")) {
        return Double.parseDouble(word.replace("inf", "Infinity"));
      }
      return Long.parseLong(word.startsWith("+") ? word.substring(1) : word);
    } catch (NumberFormatException e) {
      throw error("not a number: " + word);
    }
  }

  private List<Object> array() {
    pos++; // [
    List<Object> out = new ArrayList<>();
    while (true) {
      skipBlank();
      if (peek() == ']') {
        pos++;
        return out;
      }
      out.add(value());
      skipBlank();
      if (peek() == ',') {
        pos++;
      } else if (peek() != ']') {
        throw error("expected ',' or ']' in an array");
      }
    }
  }

  private Map<String, Object> inlineTable() {
    pos++; // {
    Map<String, Object> out = new LinkedHashMap<>();
    skipSpaces();
    if (peek() == '}') {
      pos++;
      return out;
    }
    while (true) {
      keyValue(out);
      skipSpaces();
      if (peek() == ',') {
        pos++;
      } else if (peek() == '}') {
        pos++;
        return out;
      } else {
        throw error("expected ',' or '}' in an inline table");
      }
    }
  }

  private String literalString() {
    pos++; // '
    int end = src.indexOf('\'', pos);
    int nl = src.indexOf('\n', pos);
    if (end < 0 || (nl >= 0 && nl < end)) {
      throw error("unterminated string");
    }
    String s = src.substring(pos, end);
    pos = end + 1;
    return s;
  }

  private String basicString() {
    pos++; // "
    StringBuilder b = new StringBuilder();
    while (true) {
      if (atEnd() || peek() == '\n') {
        throw error("unterminated string");
      }
      char c = src.charAt(pos++);
      if (c == '"') {
        return b.toString();
      }
      if (c != '\\') {
        b.append(c);
        continue;
      }
      if (atEnd()) {
        throw error("unterminated string");
      }
      char e = src.charAt(pos++);
      switch (e) {
        case 'b':
          b.append('\b');
          break;
        case 't':
          b.append('\t');
          break;
        case 'n':
          b.append('\n');
          break;
        case 'f':
          b.append('\f');
          break;
        case 'r':
          b.append('\r');
          break;
        case '"':
          b.append('"');
          break;
        case '\\':
          b.append('\\');
          break;
        case 'u':
        case 'U': {
          int n = e == 'u' ? 4 : 8;
          if (pos + n > src.length()) {
            throw error("bad unicode escape");
          }
          b.appendCodePoint(Integer.parseInt(src.substring(pos, pos + n), 16));
          pos += n;
          break;
        }
        default:
          throw error("bad escape \\" + e);
      }
    }
  }
}
