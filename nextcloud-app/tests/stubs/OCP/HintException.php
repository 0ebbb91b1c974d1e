<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of OCP (stable31), only what the app uses.
 */

namespace OCP;

class HintException extends \Exception {
	private string $hint;

	public function __construct($message = '', $hint = '', $code = 0, ?\Exception $previous = null) {
		$this->hint = $hint;
		parent::__construct($message, $code, $previous);
	}

	public function getHint(): string {
		return $this->hint === '' ? $this->message : $this->hint;
	}
}
