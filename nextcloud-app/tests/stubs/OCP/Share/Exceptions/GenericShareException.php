<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of OCP (stable31), only what the app uses.
 */

namespace OCP\Share\Exceptions;

use OCP\HintException;

class GenericShareException extends HintException {
	public function __construct(string $message = '', string $hint = '', int $code = 404, ?\Exception $previous = null) {
		parent::__construct($message, $hint === '' ? $message : $hint, $code, $previous);
	}
}
