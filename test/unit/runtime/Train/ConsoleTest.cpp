// What a person sees on the terminal during a run: generated text made
// safe to print, and the live status line under the log.
#include "runtime/Train/Console.h"
#include "runtime/Serve/Generate.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

using namespace llmc::runtime;

namespace {

TEST(TerminalTextTest, PrintableTextPassesUnchanged) {
  EXPECT_EQ(TerminalText::escape("Once upon a time,\n\tthe end."),
            "Once upon a time,\n\tthe end.");
  // Multi-byte UTF-8: two, three and four bytes.
  EXPECT_EQ(TerminalText::escape("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x99\x82"),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x99\x82");
}

TEST(TerminalTextTest, ControlsAndBrokenUtf8AreEscaped) {
  // ESC [ 2 J would clear the screen; BEL rings; DEL; C1 CSI (U+009B).
  EXPECT_EQ(TerminalText::escape("a\x1b[2Jb\x07\x7f\xc2\x9b"),
            "a\\x1b[2Jb\\x07\\x7f\\xc2\\x9b");
  // A lone continuation byte, an overlong '/', a surrogate, a cut-off
  // sequence at the end, a byte that never starts a sequence.
  EXPECT_EQ(TerminalText::escape("\x80"), "\\x80");
  EXPECT_EQ(TerminalText::escape("\xc0\xaf"), "\\xc0\\xaf");
  EXPECT_EQ(TerminalText::escape("\xed\xa0\x80"), "\\xed\\xa0\\x80");
  EXPECT_EQ(TerminalText::escape("ok\xe2\x82"), "ok\\xe2\\x82");
  EXPECT_EQ(TerminalText::escape("\xff"), "\\xff");
  // A right-to-left override would reorder what follows it on screen.
  EXPECT_EQ(TerminalText::escape("x\xe2\x80\xaey"), "x\\xe2\\x80\\xaey");
}

TEST(TerminalTextTest, SequencesSplitAcrossTokensAreHeldBack) {
  // A byte-level tokenizer emits the euro sign as three tokens.
  TerminalText text;
  EXPECT_EQ(text.feed("\xe2"), "");
  EXPECT_EQ(text.feed("\x82"), "");
  EXPECT_EQ(text.feed("\xac!"), "\xe2\x82\xac!");
  // An invalid continuation ends the wait: the held byte is escaped and
  // the next one judged on its own.
  EXPECT_EQ(text.feed("\xe2"), "");
  EXPECT_EQ(text.feed("A"), "\\xe2A");
  EXPECT_EQ(text.feed("\xf0\x9f"), "");
  EXPECT_EQ(text.finish(), "\\xf0\\x9f");
  EXPECT_EQ(text.finish(), "");
}

TEST(ConsoleTest, StatusLineIsErasedBeforeEachLineAndRedrawnAfter) {
  std::string out;
  {
    llvm::raw_string_ostream terminal(out);
    StatusConsole console(terminal, 30);
    console << "first line\n";
    console.setStatus("[=>  ] 1/4 25% | loss 5.5000 | 1.0k tok/s");
    console << "step " << 2 << "\n";
    console.setStatus("[==> ] 2/4");
    console.clearStatus();
    console << "done\n";
  }
  // The status is cut to the width less one column; "\r\x1b[K" erases it.
  EXPECT_EQ(out, "first line\n"
                 "[=>  ] 1/4 25% | loss 5.5000 "
                 "\r\x1b[Kstep 2\n"
                 "[=>  ] 1/4 25% | loss 5.5000 "
                 "\r\x1b[K[==> ] 2/4"
                 "\r\x1b[Kdone\n");
}

TEST(ConsoleTest, ProgressBar) {
  EXPECT_EQ(progressBar(0, 12), "[>         ]");
  EXPECT_EQ(progressBar(0.5, 12), "[=====>    ]");
  EXPECT_EQ(progressBar(1, 12), "[==========]");
  EXPECT_EQ(progressBar(7, 6), "[====]");
}

} // namespace
