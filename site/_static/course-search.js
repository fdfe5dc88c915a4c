/* Search result snippets come from the page's lesson text: Sphinx takes them from the page's [role="main"],
   which in this theme also holds the header's buttons, the page's contents and their copy for print; those are
   left out first. */
document.addEventListener("DOMContentLoaded", () => {
  if (typeof Search === "undefined" || !Search.htmlToText) return;
  const htmlToText = Search.htmlToText;
  const MENUS = ".bd-header-article, .bd-sidebar-secondary, .onlyprint, .prev-next-area, .bd-footer-content, "
    + ".course-language-switch, .course-buttons";
  Search.htmlToText = (htmlString, anchor) => {
    const page = new DOMParser().parseFromString(htmlString, "text/html");
    page.querySelectorAll(MENUS).forEach((element) => element.remove());
    return htmlToText(page.documentElement.outerHTML, anchor);
  };
});

/* A Chinese query is cut into the words the index knows. Sphinx cuts a query only at spaces and punctuation, so
   "分布式训练" stays one term, while the index holds the words jieba cut the pages into ("分布式", "训练"): the
   query would find nothing. Each run of Chinese characters that is not itself a word of the index is cut into
   the longest words it knows, from the left (forward maximum matching); a page must then hold every word, as for
   a query of several words. searchtools.js keeps a splitQuery defined before it loads (this file loads first). */
var splitQuery = (query) => {
  const index = typeof Search === "undefined" ? null : Search._index;
  const known = (word) => Boolean(index && (word in index.terms || word in index.titleterms));
  return query
    .split(/[^\p{Letter}\p{Number}_\p{Emoji_Presentation}]+/gu)
    .filter((term) => term)
    .flatMap((term) => {
      if (!index || !/\p{Script=Han}/u.test(term) || known(term)) return [term];
      const words = [];
      for (let start = 0, end; start < term.length; start = end) {
        end = term.length;
        while (end > start + 1 && !known(term.slice(start, end))) end -= 1;
        words.push(term.slice(start, end));
      }
      return words;
    });
};
