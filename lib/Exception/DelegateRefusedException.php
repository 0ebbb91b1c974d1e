<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Exception;

/**
 * DelegateRefusedException is an action the sidecar asked for on a user's behalf that the
 * user may not do (a file that is not theirs, a conversation they are not in). The OCS API
 * answers 403 with the code and the message, which the agent reads: plain language, no
 * internals.
 */
final class DelegateRefusedException extends \RuntimeException {
	public function __construct(
		private readonly string $errorCode,
		string $message,
	) {
		parent::__construct($message);
	}

	public function getErrorCode(): string {
		return $this->errorCode;
	}
}
