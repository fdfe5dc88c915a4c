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
