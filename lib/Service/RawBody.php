<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

/**
 * RawBody is the request body exactly as it arrived: a signature covers these bytes, and
 * Nextcloud's IRequest only offers the parameters it parsed from them.
 */
class RawBody {
	public function read(): string {
		return (string)file_get_contents('php://input');
	}
}
