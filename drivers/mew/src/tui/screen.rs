//! What the interactive client shows: the core's space view ([`mew_core::view::View`])
//! drawn with ratatui, and keys turned into the view's commands. What the screen keeps of
//! its own is only how it is drawn: the input line, the dialog open, long texts expanded.
//! Nothing here touches a terminal or a socket, so every screen is tested with ratatui's
//! test backend.

use ratatui::Frame;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span, Text};
use ratatui::widgets::{Block, Clear, Paragraph, Wrap};

use mew_core::Envelope;
use mew_core::participant::{AvailableTool, Event};
use mew_core::view::chatter::FOLDED_LINES;
use mew_core::view::{
    Action, Command, FieldKind, Item, ItemKind, Proposal, Question, Reply, Suggestion, View,
    ViewLimits, ViewState,
};

/// Input history kept.
const MAX_HISTORY: usize = 200;
/// Capabilities listed per participant, at most.
const MAX_CAPS_SHOWN: usize = 6;
/// Tools listed per participant, at most.
const MAX_TOOLS_SHOWN: usize = 5;

/// The keys of this screen, after the view's commands in `/help`.
const KEYS: &[&str] = &[
    "type a line and Enter to chat; Enter on an empty line reviews waiting proposals",
    "review: y approve once, n reject, a always allow, Esc later; suggestion: g grant, d dismiss",
    "question: Tab/Up/Down move between fields, Enter answers, Ctrl-D declines, Esc cancels",
    "Ctrl-O expands long texts",
];

#[derive(Debug, Clone, PartialEq)]
enum Dialog {
    /// The first suggestion of the view.
    Suggest,
    /// The first proposal of the queue, awaiting a key.
    Review,
    /// Typing a reason to reject it.
    Reason(String),
    /// Confirming the grant of "always allow".
    Confirm,
    /// Answering the first question of the view.
    Question,
}

/// What the person typed into the form of the question answered now.
#[derive(Debug, Clone, Default, PartialEq)]
struct Form {
    /// The question's id.
    question: String,
    /// One text per field, starting with the field's default.
    texts: Vec<String>,
    /// The field being typed into.
    at: usize,
}

/// The screen: the view, and how it is drawn.
#[derive(Debug)]
pub struct Screen {
    view: View,
    input: String,
    history: Vec<String>,
    history_at: Option<usize>,
    dialog: Option<Dialog>,
    /// Long texts shown whole (Ctrl-O).
    expanded: bool,
    /// The form of the question answered now.
    form: Form,
}

fn short(v: &serde_json::Value, max: usize) -> String {
    let s = v.to_string();
    if s.chars().count() > max {
        s.chars().take(max.saturating_sub(1)).collect::<String>() + "…"
    } else {
        s
    }
}

impl Screen {
    /// A screen for participant `me`.
    pub fn new(me: &str) -> Screen {
        Screen {
            view: View::new(me, ViewLimits::default()),
            input: String::new(),
            history: Vec::new(),
            history_at: None,
            dialog: None,
            expanded: false,
            form: Form::default(),
        }
    }

    fn state(&self) -> &ViewState {
        self.view.state()
    }

    /// The next thing the participant must do for the person.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.view.poll_action()
    }

    /// The id of the last envelope shown that the gateway keeps.
    #[cfg(test)]
    pub fn last_seen(&self) -> Option<&str> {
        self.view.last_seen()
    }

    /// An event of the participant.
    pub fn handle_event(&mut self, event: &Event) {
        self.follow(|v| v.handle_event(event));
    }

    /// The history fetched after a join, or why there is none.
    pub fn handle_history(&mut self, history: Result<Vec<Envelope>, String>) {
        self.follow(|v| v.handle_history(history));
    }

    /// The tools discovered.
    pub fn handle_tools(&mut self, tools: &[AvailableTool]) {
        self.view.handle_tools(tools);
    }

    /// Adds a note from the program (a result, an error).
    pub fn note(&mut self, text: impl Into<String>) {
        self.view.note(text);
    }

    /// Feeds the view, then opens the dialog its queue and suggestions call for: a
    /// proposal that arrived opens the review; one settled elsewhere closes its dialog
    /// (the next one is reviewed); a suggestion shows when nothing else is open.
    fn follow(&mut self, feed: impl FnOnce(&mut View)) {
        let before: Vec<String> = self.state().queue.iter().map(|p| p.id.clone()).collect();
        feed(&mut self.view);
        // A question holds up someone's call: it comes before anything else on the screen,
        // but never interrupts a reason being typed.
        let asked = !self.state().questions.is_empty();
        if asked && matches!(self.dialog, None | Some(Dialog::Review | Dialog::Suggest)) {
            self.dialog = Some(Dialog::Question);
            self.sync_form();
            return;
        }
        if !asked && self.dialog == Some(Dialog::Question) {
            self.dialog = None;
        }
        let queue = &self.state().queue;
        let closed = before.iter().any(|id| !queue.iter().any(|p| &p.id == id));
        let arrived = queue.iter().any(|p| !before.contains(&p.id));
        if closed && queue.is_empty() {
            self.dialog = None;
        } else if closed && self.dialog != Some(Dialog::Review) {
            self.dialog = Some(Dialog::Review);
        }
        if self.dialog.is_none() {
            if arrived {
                self.dialog = Some(Dialog::Review);
            } else if !self.state().suggestions.is_empty() {
                self.dialog = Some(Dialog::Suggest);
            }
        }
    }

    /// After a decision: the next proposal, else the next suggestion, else the input line.
    fn next_dialog(&mut self) {
        self.dialog = if !self.state().questions.is_empty() {
            self.sync_form();
            Some(Dialog::Question)
        } else if !self.state().queue.is_empty() {
            Some(Dialog::Review)
        } else if !self.state().suggestions.is_empty() {
            Some(Dialog::Suggest)
        } else {
            None
        };
    }

    /// The form follows the first question: a new one starts from its defaults.
    fn sync_form(&mut self) {
        let Some(q) = self.state().questions.front() else {
            self.form = Form::default();
            return;
        };
        if self.form.question != q.id {
            self.form = Form {
                question: q.id.clone(),
                texts: q.fields.iter().map(|f| f.text.clone()).collect(),
                at: 0,
            };
        }
    }

    /// A key in the question's dialog.
    fn question_key(&mut self, key: KeyEvent) {
        self.sync_form();
        let Some(q) = self.state().questions.front() else {
            return self.next_dialog();
        };
        let n = q.fields.len();
        let reply = |r| Command::Answer {
            question: q.id.clone(),
            reply: r,
            values: Default::default(),
        };
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        let command = match key.code {
            KeyCode::Char('d') if ctrl => reply(Reply::Decline),
            KeyCode::Esc => reply(Reply::Cancel),
            KeyCode::Enter => Command::Answer {
                question: q.id.clone(),
                reply: Reply::Accept,
                values: q
                    .fields
                    .iter()
                    .zip(&self.form.texts)
                    .map(|(f, t)| (f.name.clone(), serde_json::Value::String(t.clone())))
                    .collect(),
            },
            KeyCode::Tab | KeyCode::Down if n > 0 => {
                self.form.at = (self.form.at + 1) % n;
                return;
            }
            KeyCode::BackTab | KeyCode::Up if n > 0 => {
                self.form.at = (self.form.at + n - 1) % n;
                return;
            }
            KeyCode::Backspace => {
                if let Some(t) = self.form.texts.get_mut(self.form.at) {
                    t.pop();
                }
                return;
            }
            KeyCode::Char(c) if !ctrl => {
                if let Some(t) = self.form.texts.get_mut(self.form.at) {
                    t.push(c);
                }
                return;
            }
            _ => return,
        };
        // A refused answer leaves the question open with its reason shown in the dialog.
        if self.view.handle_command(command).is_ok() {
            self.next_dialog();
        }
    }

    /// Gives the view a command; a refusal becomes a note.
    fn command(&mut self, c: Command) {
        if let Err(e) = self.view.handle_command(c) {
            self.view.note(e.to_string());
        }
    }

    /// Decides on the proposal under review.
    fn decide(&mut self, c: impl FnOnce(String) -> Command) {
        if let Some(p) = self.state().queue.front() {
            let id = p.id.clone();
            self.command(c(id));
        }
        self.next_dialog();
    }

    /// A key; `true` to quit.
    pub fn on_key(&mut self, key: KeyEvent) -> bool {
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            return true;
        }
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('o') {
            self.expanded = !self.expanded;
            return false;
        }
        match self.dialog.clone() {
            Some(Dialog::Suggest) => {
                let key_of = self.state().suggestions.front().map(|s| s.key.clone());
                match (key.code, key_of) {
                    (KeyCode::Char('g'), Some(k)) => self.command(Command::GrantSuggestion(k)),
                    (KeyCode::Char('d') | KeyCode::Esc, Some(k)) => {
                        self.command(Command::DismissSuggestion(k));
                    }
                    (KeyCode::Char('g' | 'd') | KeyCode::Esc, None) => {}
                    _ => return false,
                }
                self.next_dialog();
            }
            Some(Dialog::Review) => match key.code {
                KeyCode::Char('y') => self.decide(Command::Approve),
                KeyCode::Char('n') => self.dialog = Some(Dialog::Reason(String::new())),
                KeyCode::Char('a') => self.dialog = Some(Dialog::Confirm),
                KeyCode::Esc => {
                    // Deferred: to the back of the queue, and the keyboard back to the input.
                    if let Some(p) = self.state().queue.front() {
                        let id = p.id.clone();
                        self.command(Command::Later(id));
                    }
                    self.dialog = None;
                }
                _ => {}
            },
            Some(Dialog::Reason(mut reason)) => match key.code {
                KeyCode::Enter => self.decide(|proposal| Command::Reject { proposal, reason }),
                KeyCode::Esc => self.dialog = Some(Dialog::Review),
                KeyCode::Backspace => {
                    reason.pop();
                    self.dialog = Some(Dialog::Reason(reason));
                }
                KeyCode::Char(c) => {
                    reason.push(c);
                    self.dialog = Some(Dialog::Reason(reason));
                }
                _ => {}
            },
            Some(Dialog::Question) => self.question_key(key),
            Some(Dialog::Confirm) => match key.code {
                KeyCode::Enter | KeyCode::Char('y') => self.decide(Command::AlwaysAllow),
                KeyCode::Esc | KeyCode::Char('n') => self.dialog = Some(Dialog::Review),
                _ => {}
            },
            None => self.input_key(key.code),
        }
        false
    }

    fn input_key(&mut self, code: KeyCode) {
        match code {
            KeyCode::Enter => {
                let line = std::mem::take(&mut self.input);
                self.history_at = None;
                if line.trim().is_empty() {
                    // Enter on an empty line brings deferred proposals back.
                    if !self.state().queue.is_empty() {
                        self.dialog = Some(Dialog::Review);
                    }
                    return;
                }
                if self.history.len() >= MAX_HISTORY {
                    self.history.remove(0);
                }
                self.history.push(line.clone());
                let help = line.trim() == "/help";
                self.command(Command::Line(line));
                if help {
                    for k in KEYS {
                        self.view.note(*k);
                    }
                }
            }
            KeyCode::Backspace => {
                self.input.pop();
            }
            KeyCode::Up => {
                let at = self
                    .history_at
                    .map_or(self.history.len(), |a| a)
                    .saturating_sub(1);
                if let Some(h) = self.history.get(at) {
                    self.input = h.clone();
                    self.history_at = Some(at);
                }
            }
            KeyCode::Char(c) => self.input.push(c),
            _ => {}
        }
    }

    /// The display lines of an item.
    fn draw_item(&self, item: &Item, out: &mut Vec<Line<'static>>) {
        let s = self.state();
        if item.background && !s.verbose {
            return;
        }
        let dim = Style::new().add_modifier(Modifier::DIM);
        let italic = Style::new().add_modifier(Modifier::ITALIC);
        let start = out.len();
        match item.kind {
            ItemKind::Chat => out.push(Line::from(vec![
                Span::styled(
                    format!("{}: ", item.from),
                    Style::new().add_modifier(Modifier::BOLD),
                ),
                Span::raw(item.text.clone()),
            ])),
            ItemKind::Note | ItemKind::Error => out.push(Line::from(vec![
                Span::styled("* ", dim),
                Span::raw(item.text.clone()),
            ])),
            ItemKind::Reasoning => {
                let fold = item.context.as_ref().and_then(|c| s.folds.get(c));
                out.push(match fold {
                    Some(f) => Line::from(Span::styled(format!("  ▸ {}", f.summary), italic)),
                    None => Line::from(""),
                });
            }
            ItemKind::Thought => {
                out.push(Line::from(Span::styled(format!("  {}", item.text), italic)));
            }
            _ => out.push(Line::from(item.text.clone())),
        }
        let shown = if self.expanded {
            item.body.len()
        } else {
            item.body.len().min(FOLDED_LINES)
        };
        for l in &item.body[..shown] {
            out.push(Line::from(format!("    {l}")));
        }
        if shown < item.body.len() {
            out.push(Line::from(Span::styled(
                format!(
                    "    … {} more line(s): Ctrl-O expands",
                    item.body.len() - shown
                ),
                dim,
            )));
        }
        if item.background {
            for l in &mut out[start..] {
                *l = std::mem::take(l).style(dim);
            }
        }
    }

    /// Draws the whole screen.
    pub fn render(&self, f: &mut Frame) {
        let s = self.state();
        let area = f.area();
        let notices = u16::try_from(s.notices.len().min(4) * 2).unwrap_or(8);
        let [banner, main, input, status] = Layout::vertical([
            Constraint::Length(if notices == 0 { 0 } else { notices + 2 }),
            Constraint::Min(3),
            Constraint::Length(3),
            Constraint::Length(1),
        ])
        .areas(area);
        if notices > 0 {
            let lines: Vec<Line> = s
                .notices
                .iter()
                .take(4)
                .flat_map(|n| {
                    [
                        Line::from(Span::styled(
                            n.text.clone(),
                            Style::new().add_modifier(Modifier::BOLD),
                        )),
                        Line::from(format!("  open {}", n.url)),
                    ]
                })
                .collect();
            f.render_widget(
                Paragraph::new(lines).block(Block::bordered().title(" sign in ")),
                banner,
            );
        }
        let side = if main.width >= 70 { 24 } else { 0 };
        let [messages, panel] =
            Layout::horizontal([Constraint::Min(20), Constraint::Length(side)]).areas(main);
        let inner_h = messages.height.saturating_sub(2) as usize;
        // The newest items that can fill the pane (hidden background items draw nothing).
        let mut shown: Vec<Line> = Vec::new();
        let want = inner_h.max(1) * 4;
        for i in s.items.iter().rev() {
            let mut lines = Vec::new();
            self.draw_item(i, &mut lines);
            lines.reverse();
            shown.extend(lines);
            if shown.len() >= want {
                break;
            }
        }
        shown.reverse();
        // Keep the newest lines in view: scroll past what does not fit once wrapped.
        let inner_w = usize::from(messages.width.saturating_sub(2)).max(1);
        let total: usize = shown
            .iter()
            .map(|l| l.width().div_ceil(inner_w).max(1))
            .sum();
        let para = Paragraph::new(Text::from(shown))
            .wrap(Wrap { trim: false })
            .scroll((total.saturating_sub(inner_h) as u16, 0))
            .block(Block::bordered().title(" messages "));
        f.render_widget(para, messages);
        if side > 0 {
            f.render_widget(
                Paragraph::new(self.members_lines())
                    .wrap(Wrap { trim: false })
                    .block(Block::bordered().title(" participants ")),
                panel,
            );
        }
        let pending = if s.queue.is_empty() {
            String::new()
        } else {
            format!(" ({} to review: Enter) ", s.queue.len())
        };
        f.render_widget(
            Paragraph::new(format!("> {}", self.input))
                .block(Block::bordered().title(format!(" {}{pending}", s.me))),
            input,
        );
        f.render_widget(
            Paragraph::new(format!(
                "{}{}   /help for commands, Ctrl-C to quit",
                s.status,
                match (s.background, s.verbose) {
                    (0, _) => String::new(),
                    (n, false) => format!("   {n} background message(s) hidden: /verbose"),
                    (n, true) => format!("   {n} background message(s) shown"),
                }
            )),
            status,
        );
        match (&self.dialog, s.queue.front(), s.suggestions.front()) {
            (Some(Dialog::Question), _, _) => {
                if let Some(q) = s.questions.front() {
                    render_question(f, area, q, &self.form, s.questions.len());
                }
            }
            (Some(Dialog::Suggest), _, Some(sg)) => render_suggestion(f, area, sg),
            (Some(d), Some(p), _) if *d != Dialog::Suggest => {
                render_dialog(f, area, d, p, s.queue.len());
            }
            _ => {}
        }
    }

    /// The participants panel: each member with its tools and capabilities (each with its
    /// payload pattern: `mcp/request` limited to `tools/list` must not read as "may call
    /// anything").
    fn members_lines(&self) -> Vec<Line<'static>> {
        let dim = Style::new().add_modifier(Modifier::DIM);
        let mut lines = Vec::new();
        for m in &self.state().members {
            lines.push(Line::from(format!("● {}", m.id)));
            for t in m.tools.iter().take(MAX_TOOLS_SHOWN) {
                lines.push(Line::from(format!("  · {t}")));
            }
            if m.tools.len() > MAX_TOOLS_SHOWN {
                let more = m.tools.len() - MAX_TOOLS_SHOWN;
                lines.push(Line::from(format!("  · +{more} tools")));
            }
            for c in m.capabilities.iter().take(MAX_CAPS_SHOWN) {
                lines.push(Line::from(Span::styled(format!("  {c}"), dim)));
            }
            if m.capabilities.len() > MAX_CAPS_SHOWN {
                let more = m.capabilities.len() - MAX_CAPS_SHOWN;
                lines.push(Line::from(Span::styled(format!("  +{more} more"), dim)));
            }
        }
        lines
    }
}

fn render_suggestion(f: &mut Frame, area: Rect, s: &Suggestion) {
    let r = centered(area, 76, 10);
    let lines = vec![
        Line::from(s.summary.clone()),
        Line::from(""),
        Line::from(format!("grant {}", short(&s.capability, 300))),
        Line::from(""),
        Line::from(Span::styled(
            "g grant   d dismiss",
            Style::new().add_modifier(Modifier::BOLD),
        )),
    ];
    f.render_widget(Clear, r);
    f.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(Block::bordered().title(" suggestion ")),
        r,
    );
}

fn render_dialog(f: &mut Frame, area: Rect, d: &Dialog, p: &Proposal, waiting: usize) {
    let r = centered(area, 76, 14);
    let args = serde_json::to_string_pretty(&p.payload["params"]["arguments"]).unwrap_or_default();
    let mut lines = vec![
        Line::from(format!("{} proposes {}", p.from, p.what)),
        Line::from(""),
    ];
    lines.extend(args.lines().take(6).map(|l| Line::from(format!("  {l}"))));
    lines.push(Line::from(""));
    match d {
        Dialog::Review => lines.push(Line::from(Span::styled(
            "y approve once   n reject   a always allow   Esc later",
            Style::new().add_modifier(Modifier::BOLD),
        ))),
        Dialog::Reason(reason) => {
            lines.push(Line::from(format!("reason: {reason}_")));
            lines.push(Line::from("Enter reject   Esc back"));
        }
        Dialog::Suggest | Dialog::Question => {}
        Dialog::Confirm => {
            lines.push(Line::from(format!(
                "grant {}: {}",
                p.from,
                short(&p.capability, 200)
            )));
            lines.push(Line::from("Enter grant and approve   Esc back"));
        }
    }
    let title = if waiting > 1 {
        format!(" review ({} more waiting) ", waiting - 1)
    } else {
        " review ".to_owned()
    };
    f.render_widget(Clear, r);
    f.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(Block::bordered().title(title)),
        r,
    );
}

/// The question's dialog: its message, then its link or its form (the field typed into
/// marked, kept in sight), the reason the last answer was refused, and the keys.
fn render_question(f: &mut Frame, area: Rect, q: &Question, form: &Form, waiting: usize) {
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let dim = Style::new().add_modifier(Modifier::DIM);
    let mut head = vec![Line::from(format!("{} asks: {}", q.from, q.message))];
    let mut foot = Vec::new();
    let mut fields: Vec<Line> = Vec::new();
    let mut focus = 0;
    if let Some(url) = &q.url {
        head.push(Line::from(""));
        head.push(Line::from(format!("open {url}")));
    }
    for (i, field) in q.fields.iter().enumerate() {
        let here = i == form.at;
        if here {
            focus = fields.len();
        }
        let text = form.texts.get(i).map_or("", String::as_str);
        let mark = if here { "›" } else { " " };
        let star = if field.required { "*" } else { "" };
        let cursor = if here { "_" } else { "" };
        let style = if here { bold } else { Style::new() };
        fields.push(Line::from(vec![
            Span::styled(format!("{mark} {}{star}: ", field.title), style),
            Span::raw(format!("{text}{cursor}")),
        ]));
        let mut info = Vec::new();
        match field.kind {
            FieldKind::Boolean => info.push("yes or no".to_owned()),
            FieldKind::Choice | FieldKind::Choices => {
                let opts: Vec<String> = field
                    .options
                    .iter()
                    .enumerate()
                    .map(|(n, o)| format!("{} {}", n + 1, o.title))
                    .collect();
                let how = if field.kind == FieldKind::Choices {
                    "comma-separated: "
                } else {
                    ""
                };
                info.push(format!("{how}{}", opts.join(" · ")));
            }
            _ => {}
        }
        if let Some(fmt) = &field.format {
            info.push(fmt.clone());
        }
        if !field.hint.is_empty() {
            info.push(field.hint.clone());
        }
        if !field.description.is_empty() {
            info.push(field.description.clone());
        }
        fields.push(Line::from(Span::styled(
            format!("    {}", info.join("; ")),
            dim,
        )));
    }
    if let Some(p) = &q.problem {
        foot.push(Line::from(Span::styled(format!("! {p}"), bold)));
    }
    let keys = if q.url.is_some() {
        "Enter opened it   Ctrl-D decline   Esc cancel"
    } else {
        "Tab next field   Enter answer   Ctrl-D decline   Esc cancel"
    };
    foot.push(Line::from(Span::styled(keys, bold)));
    let want = head.len() + fields.len() + foot.len() + 4;
    let r = centered(area, 90, u16::try_from(want).unwrap_or(u16::MAX));
    let title = if waiting > 1 {
        format!(" question ({} more waiting) ", waiting - 1)
    } else {
        " question ".to_owned()
    };
    let block = Block::bordered().title(title);
    let inner = block.inner(r);
    f.render_widget(Clear, r);
    f.render_widget(block, r);
    // Rows a list of lines takes once wrapped to the box.
    let width = usize::from(inner.width).max(1);
    let rows =
        |lines: &[Line]| -> usize { lines.iter().map(|l| l.width().div_ceil(width).max(1)).sum() };
    head.push(Line::from(""));
    foot.insert(0, Line::from(""));
    let foot_h = u16::try_from(rows(&foot)).unwrap_or(u16::MAX);
    let head_h = u16::try_from(rows(&head))
        .unwrap_or(u16::MAX)
        .min(inner.height.saturating_sub(foot_h + 1));
    let [top, middle, bottom] = Layout::vertical([
        Constraint::Length(head_h),
        Constraint::Min(1),
        Constraint::Length(foot_h),
    ])
    .areas(inner);
    // The field typed into, with its notes, kept in sight.
    let before = rows(&fields[..focus.min(fields.len())]);
    let it = rows(&fields[focus.min(fields.len())..(focus + 2).min(fields.len())]);
    let scroll = (before + it).saturating_sub(usize::from(middle.height));
    let wrap = Wrap { trim: false };
    f.render_widget(Paragraph::new(head).wrap(wrap), top);
    f.render_widget(
        Paragraph::new(fields)
            .wrap(wrap)
            .scroll((u16::try_from(scroll).unwrap_or(u16::MAX), 0)),
        middle,
    );
    f.render_widget(Paragraph::new(foot).wrap(wrap), bottom);
}

/// A box of at most `w` x `h` in the middle of `area`.
fn centered(area: Rect, w: u16, h: u16) -> Rect {
    let w = area.width.saturating_sub(4).min(w);
    let h = area.height.saturating_sub(4).min(h);
    Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    }
}

#[cfg(test)]
mod tests;
