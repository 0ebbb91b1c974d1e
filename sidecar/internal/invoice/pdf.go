package invoice

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"

	"codeberg.org/go-pdf/fpdf"
)

// FormatAmount writes cents as 1,234.50.
func FormatAmount(cents int64) string {
	neg := cents < 0
	if neg {
		cents = -cents
	}
	whole := strconv.FormatInt(cents/100, 10)
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	fmt.Fprintf(&b, ".%02d", cents%100)
	return b.String()
}

// FormatQuantity writes thousandths as 2.5 (no trailing zeros).
func FormatQuantity(milli int64) string {
	s := strconv.FormatInt(milli/1000, 10)
	if frac := milli % 1000; frac != 0 {
		s += strings.TrimRight(fmt.Sprintf(".%03d", frac), "0")
	}
	return s
}

// formatRate writes hundredths of a percent as 19 or 7.5.
func formatRate(bp int64) string {
	s := strconv.FormatInt(bp/100, 10)
	if frac := bp % 100; frac != 0 {
		s += strings.TrimRight(fmt.Sprintf(".%02d", frac), "0")
	}
	return s
}

// RenderPDF draws the invoice on A4 pages. The output depends on d alone: the
// document dates are the issue date, so rendering twice gives the same bytes.
// The built-in fonts cover Western European text (Windows-1252); other characters
// print as '.'.
func RenderPDF(d Document) ([]byte, error) {
	issued, err := time.Parse(time.DateOnly, d.Issued)
	if err != nil {
		return nil, fmt.Errorf("invoice: render %s: issue date: %w", d.Number, err)
	}
	pdf := fpdf.New("P", "mm", "A4", "")
	pdf.SetCreationDate(issued)
	pdf.SetModificationDate(issued)
	pdf.SetCatalogSort(true)
	pdf.SetCompression(true)
	tr := pdf.UnicodeTranslatorFromDescriptor("")
	pdf.SetTitle("Invoice "+d.Number, true)
	pdf.SetAuthor(d.From.Name, true)
	pdf.SetCreator("Istota", true)
	pdf.SetProducer("Istota", true)
	pdf.SetMargins(20, 20, 20)
	pdf.SetAutoPageBreak(true, 25)
	pdf.AliasNbPages("{nb}")
	pdf.SetFooterFunc(func() {
		pdf.SetY(-15)
		pdf.SetFont("Helvetica", "", 8)
		pdf.CellFormat(0, 5, tr(fmt.Sprintf("%s · %s · page %d of {nb}", d.From.Name, d.Number, pdf.PageNo())), "", 0, "C", false, 0, "")
	})
	pdf.AddPage()
	const width = 170.0 // A4 less the margins

	// Issuer, left; invoice facts, right.
	top := pdf.GetY()
	pdf.SetFont("Helvetica", "B", 12)
	pdf.MultiCell(95, 6, tr(d.From.Name), "", "L", false)
	pdf.SetFont("Helvetica", "", 9)
	for _, l := range partyLines(d.From) {
		pdf.MultiCell(95, 4.5, tr(l), "", "L", false)
	}
	leftEnd := pdf.GetY()
	pdf.SetXY(120, top)
	pdf.SetFont("Helvetica", "B", 18)
	pdf.CellFormat(70, 9, "INVOICE", "", 2, "R", false, 0, "")
	pdf.SetFont("Helvetica", "", 9)
	facts := [][2]string{{"Number", d.Number}, {"Date", d.Issued}, {"Due", d.Due}}
	if d.Period != "" {
		facts = append(facts, [2]string{"Period", d.Period})
	}
	for _, f := range facts {
		pdf.SetX(120)
		pdf.CellFormat(30, 5, tr(f[0]+":"), "", 0, "L", false, 0, "")
		pdf.CellFormat(40, 5, tr(f[1]), "", 1, "R", false, 0, "")
	}
	pdf.SetY(max(leftEnd, pdf.GetY()) + 10)

	// Recipient.
	pdf.SetFont("Helvetica", "B", 9)
	pdf.CellFormat(0, 5, "Bill to", "", 1, "L", false, 0, "")
	pdf.SetFont("Helvetica", "", 10)
	pdf.MultiCell(100, 5, tr(d.To.Name), "", "L", false)
	pdf.SetFont("Helvetica", "", 9)
	for _, l := range partyLines(d.To) {
		pdf.MultiCell(100, 4.5, tr(l), "", "L", false)
	}
	pdf.Ln(8)
	if d.Title != "" {
		pdf.SetFont("Helvetica", "B", 11)
		pdf.MultiCell(width, 6, tr(d.Title), "", "L", false)
		pdf.Ln(2)
	}

	// Lines.
	cols := []struct {
		title string
		w     float64
		align string
	}{{"Date", 22, "L"}, {"Description", 70, "L"}, {"Qty", 16, "R"}, {"Unit", 16, "L"}, {"Rate", 20, "R"}, {"Amount", 26, "R"}}
	head := func() {
		pdf.SetFont("Helvetica", "B", 9)
		pdf.SetFillColor(235, 235, 235)
		for _, c := range cols {
			pdf.CellFormat(c.w, 6, c.title, "B", 0, c.align, true, 0, "")
		}
		pdf.Ln(-1)
		pdf.SetFont("Helvetica", "", 9)
	}
	head()
	_, pageH := pdf.GetPageSize()
	for _, l := range d.Lines {
		desc := pdf.SplitText(tr(l.Description), cols[1].w-2)
		h := 5 * float64(max(1, len(desc)))
		if pdf.GetY()+h > pageH-30 {
			pdf.AddPage()
			head()
		}
		y := pdf.GetY()
		cells := []string{l.Date, "", FormatQuantity(l.Quantity), " " + tr(l.Unit), FormatAmount(l.Rate), FormatAmount(l.Amount)}
		x := 20.0
		for i, c := range cols {
			pdf.SetXY(x, y)
			if i == 1 {
				pdf.MultiCell(c.w, 5, strings.Join(desc, "\n"), "", "L", false)
			} else {
				pdf.CellFormat(c.w, 5, cells[i], "", 0, c.align, false, 0, "")
			}
			x += c.w
		}
		pdf.SetXY(20, y+h)
		pdf.Line(20, y+h, 20+width, y+h)
	}

	// Totals.
	pdf.Ln(4)
	total := func(label, value string, bold bool) {
		style := ""
		if bold {
			style = "B"
		}
		pdf.SetFont("Helvetica", style, 10)
		pdf.SetX(100)
		pdf.CellFormat(60, 6, tr(label), "", 0, "R", false, 0, "")
		pdf.CellFormat(30, 6, value, "", 1, "R", false, 0, "")
	}
	if d.Tax > 0 || d.TaxRate > 0 {
		total("Net", FormatAmount(d.Net), false)
		total(fmt.Sprintf("%s %s%%", d.TaxLabel, formatRate(d.TaxRate)), FormatAmount(d.Tax), false)
	}
	total("Total "+d.Currency, FormatAmount(d.Total), true)
	pdf.Ln(6)
	pdf.SetFont("Helvetica", "", 9)
	if d.Note != "" {
		pdf.MultiCell(width, 4.5, tr(d.Note), "", "L", false)
		pdf.Ln(3)
	}
	pdf.MultiCell(width, 4.5, tr(fmt.Sprintf("Please pay %s %s by %s, quoting %s.", FormatAmount(d.Total), d.Currency, d.Due, d.Number)), "", "L", false)
	if d.Bank != "" {
		pdf.Ln(2)
		pdf.SetFont("Helvetica", "B", 9)
		pdf.CellFormat(0, 5, "Payment details", "", 1, "L", false, 0, "")
		pdf.SetFont("Helvetica", "", 9)
		pdf.MultiCell(width, 4.5, tr(d.Bank), "", "L", false)
	}
	var buf bytes.Buffer
	if err := pdf.Output(&buf); err != nil {
		return nil, fmt.Errorf("invoice: render %s: %w", d.Number, err)
	}
	return buf.Bytes(), nil
}

func partyLines(p Party) []string {
	var out []string
	if p.Address != "" {
		out = append(out, p.Address)
	}
	if p.TaxID != "" {
		out = append(out, "Tax ID: "+p.TaxID)
	}
	if p.Email != "" {
		out = append(out, p.Email)
	}
	return out
}
