/* The course's search ranking (html_search_scorer in site/conf.py): the page that teaches a term comes first.
   Sphinx scores a page 15 when a word of the query is in any of its headings, 5 when it is only in its text.
   On top of that: +20 when the page's own title names the term (lesson 07, "显存"), +10 when one of its
   numbered sections ("9. Checkpoints that load anywhere: map_location") does; a solutions page, which repeats
   its lesson's title, gets +10 for it. A subsection's heading that only
   mentions the term in passing, or a line of a page's contents, gets nothing more. */
var Scorer = {
  score: (result) => {
    const [docname, , , , score, , kind] = result;
    const index = typeof Search === "undefined" ? null : Search._index;
    const words = (new URLSearchParams(window.location.search).get("q") || "")
      .toLowerCase()
      .split(/\s+/)
      .filter((word) => word.length > 1);
    if (!index || !words.length || kind === "index") return score;
    const file = index.docnames.indexOf(docname);
    const names = (text) => words.some((word) => text.toLowerCase().includes(word));
    // a lesson's solutions page has the lesson's title too: the lesson teaches the term, so it comes first
    if (names(index.titles[file] || "")) return score + (docname.includes("solutions/") ? 10 : 20);
    const numbered = Object.entries(index.alltitles).some(
      ([title, places]) => /^\d+\. /.test(title) && names(title) && places.some(([f]) => f === file),
    );
    return numbered ? score + 10 : score;
  },
  objNameMatch: 11,
  objPartialMatch: 6,
  objPrio: { 0: 15, 1: 5, 2: -5 },
  objPrioDefault: 0,
  title: 15,
  partialTitle: 7,
  term: 5,
  partialTerm: 2,
};
